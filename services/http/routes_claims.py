"""HTTP routes: claims."""
from fastapi import APIRouter

router = APIRouter(tags=["claims"])
