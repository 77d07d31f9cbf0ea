"""The bundle's files as they are written: ``launch.py`` verbatim, ``README.md`` with fields filled in."""
