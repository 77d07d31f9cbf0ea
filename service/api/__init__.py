"""The /v1 resources, one router per resource."""
