"""Precision plugins: how the module, its inputs, the forward pass, backward and optimizer steps
are carried out at a given numerical precision.

- ``base``: ``PrecisionBase`` (full float32) and what differs for float64, autocast mixed
  precision, true half precision and Apex;
- ``transformer_engine``: FP8 through NVIDIA's Transformer Engine.

The precisions of the engines that bring their own (DeepSpeed, FSDP2, XLA, PopTorch) live with
their wrappers, in ``stratcore.wrappers``.
"""
