"""Stand-in for Habana's ``habana_frameworks`` package, used only by stratgen's tests.

It is not the real package: it runs on the CPU, records the calls stratlib makes (see
``standin_events``) and backs the 'hccl' backend with gloo.

Written from the source of Intel Gaudi's PyTorch bridge, habana_frameworks of Intel Gaudi
software 1.19.0 (HabanaAI/gaudi-pytorch-bridge on GitHub, python_packages/habana_frameworks),
which is not on PyPI: torch/core/step_closure.py (mark_step), torch/hpu/__init__.py
(is_available, device_count), torch/distributed/hccl/__init__.py (initialize_distributed_hpu).
"""
