"""The renderer: Plan → Kubernetes objects through jinja2 templates (``templates/*.yaml.j2``)."""

from .render import render, revision, to_yaml

__all__ = ["render", "revision", "to_yaml"]
