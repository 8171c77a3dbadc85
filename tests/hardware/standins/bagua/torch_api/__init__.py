"""Stand-in for ``bagua.torch_api``."""
