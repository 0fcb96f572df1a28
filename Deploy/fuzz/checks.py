"""A schemathesis check of Stratus's own (loaded through SCHEMATHESIS_HOOKS by api.py).

A batch answer (records/modify, zones/modify, changes/zone …) is 200 even when one of its items
failed, so a server fault inside an item would pass `not_a_server_error`. This check fails any
answer that carries INTERNAL_ERROR anywhere in its body.
"""
import json

import schemathesis
from hypothesis.internal import lambda_sources

# Python 3.11 before 3.11.8 can fail parsing a large module's source with "SystemError: AST
# constructor recursion depth mismatch" (CPython gh-106905), which Hypothesis does only to print a
# lambda's source in a strategy's description; such failures surfaced as schemathesis "Runtime
# Error"s. A plain description serves as well.
_describe_lambda = lambda_sources.lambda_description


def _lambda_description(function):
    try:
        return _describe_lambda(function)
    except SystemError:
        return "lambda"


lambda_sources.lambda_description = _lambda_description


@schemathesis.check
def no_internal_error_item(ctx, response, case):
    """No item of an answer fails with INTERNAL_ERROR."""
    content_type = response.headers.get("content-type", [""])
    if isinstance(content_type, list):
        content_type = content_type[0] if content_type else ""
    if "json" not in content_type or response.status_code >= 500:
        return None
    try:
        body = json.loads(response.content or b"null")
    except ValueError:
        return None

    def walk(value):
        if isinstance(value, dict):
            if value.get("serverErrorCode") == "INTERNAL_ERROR":
                raise AssertionError(f"an item failed with INTERNAL_ERROR: {value.get('reason')} ({value.get('uuid')})")
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(body)
    return None
