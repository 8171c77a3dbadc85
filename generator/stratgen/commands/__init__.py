"""The commands: what each ``stratgen`` command does, on top of the pipeline.

``handlers`` runs the commands that work on a whole project (generate, check, validate, list,
schema) through ``stratgen.project``; ``new_spec`` adds a spec to a project (``stratgen new``)
and ``init_project`` makes a new project from the copier template (``stratgen init``);
``list_table`` is the table ``stratgen list`` prints; ``console`` is where they write.

Imports: every stage and ``stratgen.project``; nothing imports this folder but ``stratgen.cli``.
"""
