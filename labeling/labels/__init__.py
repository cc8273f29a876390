"""Human labels: `api` (what the labeling pages read and write), `episode_api` (a project's episode list),
`services` (frame and window labels), `selectors` (progress, filtered episode lists) and `urls` (with the
labeling pages of labeling/pages.py)."""
