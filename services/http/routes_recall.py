"""HTTP routes: recall."""
from fastapi import APIRouter

router = APIRouter(tags=["recall"])
