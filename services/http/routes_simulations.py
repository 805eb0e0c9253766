"""HTTP routes: simulations."""
from fastapi import APIRouter

router = APIRouter(tags=["simulations"])
