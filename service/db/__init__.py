"""Storage: SQLAlchemy models, engine and session set-up, migrations."""
