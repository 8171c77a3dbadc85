"""Stand-in for ``torch_xla._internal``."""
