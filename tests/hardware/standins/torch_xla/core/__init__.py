"""Stand-in for ``torch_xla.core``."""
