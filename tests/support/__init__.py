"""Test helpers: mock upstreams and fixtures shared by test modules."""
