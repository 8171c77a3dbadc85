"""The test suite, a package so that its modules import one another by their full names: support
modules are ``tests.support.*``.

``generator/`` holds the generator's tests, folder by folder as ``generator/stratgen`` is laid
out, with the fixture projects and golden trees they compare against; ``architecture/`` the
guards of how the code is laid out (import graphs, private names, module size, names, the
runtime's independence of vendors and of this suite, the contract); ``support/`` what tests
share. The runtime's tests have folders of their own (``runtime/``, ``checkpoints/``, ...).
"""
