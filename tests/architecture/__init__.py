"""Guards of the architecture: how the packages are laid out and what may import what."""
