"""Stand-in for Habana's ``habana_frameworks`` package, used only by stratgen's tests.

It is not the real package: it runs on the CPU, records the calls stratlib makes (see
``standin_events``) and backs the 'hccl' backend with gloo.
"""
