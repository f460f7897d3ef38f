"""The HTTP API's routes, an `APIRouter` per area, as FastAPI splits a larger app:
`aggregates`, `receipts`, `pipeline` (health, metrics) and `pages` (the dashboard).
`pos_lambda.serving.http.create_app` includes them; `params` says what each parameter
accepts and `responses` how each refusal answers.
"""
