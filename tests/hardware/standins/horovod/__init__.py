"""Stand-in for the ``horovod`` package, used only by stratgen's tests.

It is not Horovod: it runs one process (or claims the rank and size horovodrun would set),
records every call stratlib makes (see ``standin_events``) and communicates with nobody.

Written from Horovod's source, horovod 0.28.1 (the source distribution on PyPI), whose module
layout it keeps; tests/hardware/test_standin_apis.py checks it against that source.
"""
