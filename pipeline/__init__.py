"""The flow over the stages: a target bound to its harness, the rules' candidates enumerated, each judged
by the gate, the winners selected (with a dispatch where the winner depends on the shape), the report
written, mined preview candidates tried. It imports the stages (catalog, miner, rewriter, skeletons,
validate, harness); nothing below it imports it (tests/test_layers.py)."""
