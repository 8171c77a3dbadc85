"""What tests share: running stratgen and building projects (``generator``), user projects made
by ``stratgen init`` (``user_projects``), and the import graph of a package (``import_graph``).
"""
