"""Resolve: spec files in, one ``Catalog`` out.

``resolver`` applies ``extends`` and checks every reference between entries, with what a
strategy takes from its accelerators and launcher (``options``) and the backends the specs
declare (``backends``); the semantic checks are ``checks`` and ``device_checks``, the names a
spec may not use ``reserved_names``. What the runtime's classes say of themselves is read from
its source (``runtime_facts``), and which DeepSpeed accelerator a device trains on is decided
here (``deepspeed_accelerators``). ``selection`` picks what of the catalog goes into a
project's package.

Imports: ``stratgen.spec``; the runtime's contract.
"""
