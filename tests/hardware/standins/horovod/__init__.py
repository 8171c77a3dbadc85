"""Stand-in for the ``horovod`` package of a GPU build, used only by stratgen's tests.

Written from horovod 0.28.1 (``horovod/__init__.py``, ``horovod/torch/__init__.py``): the two
modules a strategy's requirement finds. See ``horovod/torch/__init__.py`` for what it is for.
"""
