"""The Lightning target: plugins for Lightning's Trainer and Fabric, built on stratlib's
classes (``plugins``)."""
