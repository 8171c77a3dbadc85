"""Stand-in for ``torch_xla.distributed``."""
