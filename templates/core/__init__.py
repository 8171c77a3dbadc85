"""The runtime core shared by every generated strategy: base classes, mixins, launchers,
collectives and plugins. Specs do not vary this code; generated classes configure it."""
