"""HTTP routes: erasure."""
from fastapi import APIRouter

router = APIRouter(tags=["erasure"])
