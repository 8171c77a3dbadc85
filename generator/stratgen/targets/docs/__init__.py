"""The docs target: a Markdown page for each device of a project's specs, and their index.

``device_pages`` renders the pages, ``device_table`` the devices x frameworks table of the
index (which ``stratgen list`` prints too), ``spec_comments`` reads what a spec's comments say
of each fact, and ``markdown`` makes text from specs safe to show.
"""
