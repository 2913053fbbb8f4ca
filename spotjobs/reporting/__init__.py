"""Reports for operators (`spotjobs report`, the demo's page); nothing here is deployed.

Owns the report's data views (`views`), its HTML page (`html`), the dated price table (`prices`,
`prices.json`) and the checkpoint-interval advice (`advice`).

May import: `shared/` and the rest of `spotjobs`.
"""
