"""stratgen: generate PyTorch training-strategy packages from declarative YAML specs."""

__version__ = "0.1.0"
