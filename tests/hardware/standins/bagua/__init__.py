"""Stand-in for the ``bagua`` package, used only by stratgen's tests.

It is not Bagua: it runs on CPUs over gloo, its DistributedDataParallel averages gradients
with torch's DDP whatever the algorithm, and it records the calls stratlib makes (see
``standin_events``).

Written from Bagua's source, bagua 0.9.2 (the source distribution on PyPI), whose module layout
and signatures it keeps (an algorithm refuses the keyword arguments Bagua's refuses);
tests/hardware/test_standin_apis.py checks it against that source.
"""
