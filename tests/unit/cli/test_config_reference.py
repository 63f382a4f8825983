"""`om config reference`: the configuration reference page, printed."""

from omstream.cli import main
from omstream.schemas.config.reference import render_reference
from omstream.settings import Settings


def test_om_config_reference_prints_the_generated_page(capsys):
    assert main(["config", "reference"]) == 0
    out = capsys.readouterr().out
    assert out == render_reference(Settings, env_prefix="OM_")
    assert "| `observation.messageTokens` |" in out and "| `partitions` | `OM_PARTITIONS` |" in out
