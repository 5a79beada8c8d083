"""Constants the tests share: where the repository is, and the PII key every test landing pseudonymizes with (not a
secret). Fixtures live in conftest.py; test modules import constants from here."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PII_TEST_KEY = "test-pii-key-not-a-secret"
