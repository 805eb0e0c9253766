"""HTTP routes: ops."""
from fastapi import APIRouter

router = APIRouter(tags=["ops"])
