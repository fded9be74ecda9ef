"""The QwenDisaggDeployment API (qdd.dev/v1alpha1): spec and status models, CRD generation."""

from .resource import API_VERSION, Resource, parse_resource, parse_spec
from .spec import QwenDisaggDeploymentSpec
from .status import Condition, QwenDisaggDeploymentStatus

__all__ = ["API_VERSION", "Condition", "QwenDisaggDeploymentSpec", "QwenDisaggDeploymentStatus", "Resource",
           "parse_resource", "parse_spec"]
