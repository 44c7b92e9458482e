//! Shared helpers for the driver-against-model integration tests in `tests/tests/`.
