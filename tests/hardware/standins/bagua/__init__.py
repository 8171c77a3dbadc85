"""Stand-in for the ``bagua`` package, used only by stratgen's tests.

It is not Bagua: it runs on CPUs over gloo, its DistributedDataParallel averages gradients
with torch's DDP whatever the algorithm, and it records the calls stratlib makes (see
``standin_events``).
"""
