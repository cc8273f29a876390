"""Proposals, machine-made labels people accept or reject: `trend` (the rule; no Django), `services`
(generate, accept, reject), `jobs` (project-wide generation as a background job), `api`, `views` and
`urls`."""
