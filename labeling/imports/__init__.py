"""Importing existing data: `sources` (finding, hashing and unpacking importable files; plain Python),
`rlinf_episode` (RLinf's raw episode pickles), `safe_pickle` and `pickle_errors` (loading untrusted pickles),
`services` (imported files to episodes, through the ingest services), `jobs` (imports as background jobs),
`views` and `urls` (the import page; `manage.py import_episodes` is its command-line twin)."""
