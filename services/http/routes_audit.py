"""HTTP routes: audit."""
from fastapi import APIRouter

router = APIRouter(tags=["audit"])
