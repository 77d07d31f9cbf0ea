# Placer: one image for the API (`placer serve`), the workers (`placer worker`) and `placer migrate`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml constraints.txt README.md ./
COPY solvers ./solvers
COPY service ./service
COPY client ./client
COPY cli ./cli
COPY extract ./extract
COPY launcher ./launcher
COPY migrations ./migrations
COPY alembic.ini ./
RUN pip install -c constraints.txt ".[all]" \
    && useradd --create-home --uid 10001 placer

USER placer
ENV PLACER_HOST=0.0.0.0 PLACER_PORT=8000
EXPOSE 8000
CMD ["placer", "serve"]
