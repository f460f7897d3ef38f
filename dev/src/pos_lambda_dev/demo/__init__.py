"""The proof: `pos-demo` (the end-to-end story) and `pos-chaos` (faults, then an audit).

Both are imperative shells over the project's own CLIs and functions; the text they
print (the demo's story, the chaos figures table) comes from pure functions in
`demo.story` and `demo.figures`, and the conflicting copies they add to the simulated
stream from `pos_lambda_dev.demo.conflicts`.
"""
