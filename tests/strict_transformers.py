"""strict_transformers.py: makes a deprecated transformers API fatal in the Python tests.

transformers announces deprecations two ways: Python warnings (FutureWarning, DeprecationWarning) and its own
logger (`logger.warning_once("... is deprecated ...")`). strict() turns the first into errors and makes the second
raise DeprecatedApi at the call that used the API, so a test fails where oscar_kv (or the test) calls it."""
import logging
import warnings


class DeprecatedApi(AssertionError):
    pass


class _Raise(logging.Handler):
    def emit(self, record):
        msg = record.getMessage()
        if "deprecat" in msg.lower():
            raise DeprecatedApi(f"transformers: {msg}")


def strict():
    warnings.filterwarnings("error", category=FutureWarning, module=r"transformers(\.|$)")
    warnings.filterwarnings("error", category=DeprecationWarning, module=r"transformers(\.|$)")
    log = logging.getLogger("transformers")
    if not any(isinstance(h, _Raise) for h in log.handlers):
        log.addHandler(_Raise())
