"""The renderer: Plan → Kubernetes objects through jinja2 templates (``templates/*.yaml.j2``)."""

from .render import render, render_all, revision, to_yaml

__all__ = ["render", "render_all", "revision", "to_yaml"]
