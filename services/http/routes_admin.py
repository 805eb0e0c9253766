"""HTTP routes: admin."""
from fastapi import APIRouter

router = APIRouter(tags=["admin"])
