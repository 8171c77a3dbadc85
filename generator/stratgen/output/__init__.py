"""Write: the planned files onto the disk, or compared with it.

``file_tree`` writes a planned tree of generated files atomically, file by file, keeps the
manifest that tells generated files from others, and finds drift for ``stratgen check``.

Imports: nothing of stratgen outside this folder.
"""
