"""The stratlib target: the package of strategies on stratcore, and its tests.

``strategy_modules`` and ``component_modules`` describe the modules of the package (a
``PyModule`` each), ``test_tables`` the tables of its generated tests, and ``package`` renders
them with the registry and the package's ``__init__``.
"""
