"""Stand-in for the ``horovod`` package, used only by stratgen's tests.

It is not Horovod: it runs one process (or claims the rank and size horovodrun would set),
records every call stratlib makes (see ``standin_events``) and communicates with nobody.
"""
