"""Load and parse: the spec language.

A spec file is read as YAML whose every node knows its file, line and column
(``yaml_loader``), then checked key by key against the typed model (``model``, its keys
declared with ``fields``) by ``parse``; the JSON Schema of spec files derives from the same
model (``json_schema``). ``errors`` holds the errors a user can cause, with where they come
from, for every stage.

Imports: nothing of stratgen outside this folder; the runtime's contract
(``stratcore.contract``) for the vocabularies.
"""
