"""Where Spot lives: what the fleet's own attempts observed per machine class and location
(`observations`, `store`), the capacity estimate drawn from them (`estimate`) and the placement
that chooses a location by expected cost (`placement`). docs/placement.md."""
