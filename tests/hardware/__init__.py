"""Tests of the hardware strategies that cannot run on this machine (HPU, TPU/XLA, IPU,
Horovod, Bagua), and of adding new hardware with a spec alone."""
