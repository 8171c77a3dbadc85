"""Code generation: from descriptions to the text of files.

``python_source`` turns plain values into Python source (literals, docstrings, import blocks)
and holds the description of a module (``PyModule``) that a template writes out;
``templating`` sets jinja2 up for Python source and names every generated file's source in
its header; ``formatting`` lays out what black is to lay out, remembering black's layouts in
the user's cache (``user_cache``). Nothing here knows a target.

Imports: ``stratgen.spec``, ``stratgen.resolve``.
"""
