#!/usr/bin/env python3
"""Writes .github/workflows/release.yml: what cargo-dist generates from dist-workspace.toml, with
the findings of zizmor (the security linter for GitHub workflows) fixed.

    python3 scripts/release-workflow.py           # rewrite the file
    python3 scripts/release-workflow.py --check   # fail, with the diff, if it is not as written

It needs `dist` on PATH at the version dist-workspace.toml names (`cargo install cargo-dist
--locked --version 0.34.0`). dist runs in a scratch copy of the checkout (the files git tracks
or would track), where `allow-dirty = ["ci"]` is lifted: in the checkout it stays, so that
dist's own check in the release does not fail on the fixes below. Each fix must match the
generated text exactly once, so a dist upgrade that changes it fails here rather than slipping
through. Why the release is shaped as it is: docs/src/install.md "Releases".
"""

import argparse
import difflib
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKFLOW = ".github/workflows/release.yml"
ALLOW_DIRTY = 'allow-dirty = ["ci"]\n'

# (what dist writes, what the release runs instead, why)
FIXES = [
    (
        'permissions:\n  "contents": "write"\n',
        "permissions: {}\n",
        "excessive-permissions: each job says what it needs; only `host` writes the release",
    ),
    (
        '  plan:\n    runs-on: "ubuntu-22.04"\n',
        '  plan:\n    runs-on: "ubuntu-22.04"\n    permissions:\n      "contents": "read"\n',
        "excessive-permissions: the plan reads the checkout",
    ),
    (
        "      - id: plan\n"
        "        run: |\n"
        "          dist ${{ (!github.event.pull_request && format('host --steps=create --tag={0}', github.ref_name)) || 'plan' }} --output-format=json > plan-dist-manifest.json\n",
        "      - id: plan\n"
        "        env:\n"
        "          PUBLISHING: ${{ !github.event.pull_request }}\n"
        "          TAG: ${{ github.ref_name }}\n"
        "        run: |\n"
        '          if [ "$PUBLISHING" = true ]; then\n'
        '            dist host --steps=create --tag="$TAG" --output-format=json > plan-dist-manifest.json\n'
        "          else\n"
        "            dist plan --output-format=json > plan-dist-manifest.json\n"
        "          fi\n",
        "template-injection: the tag's name reaches the shell as a variable, never as code",
    ),
    (
        "    container: ${{ matrix.container && matrix.container.image || null }}\n",
        "",
        "unpinned-images: no target of this release builds in a container",
    ),
    (
        "      - name: Install Rust non-interactively if not already installed\n"
        "        if: ${{ matrix.container }}\n"
        "        run: |\n"
        "          if ! command -v cargo > /dev/null 2>&1; then\n"
        "            curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y\n"
        '            echo "$HOME/.cargo/bin" >> $GITHUB_PATH\n'
        "          fi\n",
        "",
        "unpinned-images: the step only served a container",
    ),
    (
        "      - name: Install dist\n        run: ${{ matrix.install_dist.run }}\n",
        "      - name: Install dist\n"
        "        shell: bash\n"
        "        env:\n"
        "          INSTALL_DIST: ${{ matrix.install_dist.run }}\n"
        '        run: bash -o pipefail -c "$INSTALL_DIST"\n',
        "template-injection: the plan's command runs from a variable",
    ),
    (
        "      - name: Install dependencies\n"
        "        run: |\n"
        "          ${{ matrix.packages_install }}\n",
        "      - name: Install dependencies\n"
        "        env:\n"
        "          PACKAGES_INSTALL: ${{ matrix.packages_install }}\n"
        '        run: bash -e -c "$PACKAGES_INSTALL"\n',
        "template-injection: the plan's command runs from a variable",
    ),
    (
        "      - name: Build artifacts\n"
        "        run: |\n"
        "          # Actually do builds and make zips and whatnot\n"
        "          dist build ${{ needs.plan.outputs.tag-flag }} --print=linkage --output-format=json ${{ matrix.dist_args }} > dist-manifest.json\n",
        "      - name: Build artifacts\n"
        "        env:\n"
        "          TAG_FLAG: ${{ needs.plan.outputs.tag-flag }}\n"
        "          DIST_ARGS: ${{ matrix.dist_args }}\n"
        "        run: |\n"
        "          # Actually do builds and make zips and whatnot\n"
        "          # shellcheck disable=SC2086 # both are lists of flags\n"
        "          dist build $TAG_FLAG --print=linkage --output-format=json $DIST_ARGS > dist-manifest.json\n",
        "template-injection: the tag and the plan's flags reach the shell as variables",
    ),
    (
        "  build-global-artifacts:\n"
        "    needs:\n"
        "      - plan\n"
        "      - build-local-artifacts\n"
        '    runs-on: "ubuntu-22.04"\n',
        "  build-global-artifacts:\n"
        "    needs:\n"
        "      - plan\n"
        "      - build-local-artifacts\n"
        '    runs-on: "ubuntu-22.04"\n'
        "    permissions:\n"
        '      "contents": "read"\n',
        "excessive-permissions: the installer and checksums are built from the checkout",
    ),
    (
        "      - id: cargo-dist\n"
        "        shell: bash\n"
        "        run: |\n"
        '          dist build ${{ needs.plan.outputs.tag-flag }} --output-format=json "--artifacts=global" > dist-manifest.json\n',
        "      - id: cargo-dist\n"
        "        shell: bash\n"
        "        env:\n"
        "          TAG_FLAG: ${{ needs.plan.outputs.tag-flag }}\n"
        "        run: |\n"
        "          # shellcheck disable=SC2086 # empty, or one flag\n"
        '          dist build $TAG_FLAG --output-format=json "--artifacts=global" > dist-manifest.json\n',
        "template-injection: the tag reaches the shell as a variable",
    ),
    (
        "    env:\n"
        "      GH_TOKEN: ${{ secrets.GITHUB_TOKEN }}\n"
        '    runs-on: "ubuntu-22.04"\n'
        "    outputs:\n"
        "      val: ${{ steps.host.outputs.manifest }}\n",
        "    env:\n"
        "      GH_TOKEN: ${{ secrets.GITHUB_TOKEN }}\n"
        '    runs-on: "ubuntu-22.04"\n'
        "    permissions:\n"
        '      "contents": "write"\n'
        "    outputs:\n"
        "      val: ${{ steps.host.outputs.manifest }}\n",
        "excessive-permissions: `host` is the one job that writes: it makes the release",
    ),
    (
        "      - id: host\n"
        "        shell: bash\n"
        "        run: |\n"
        "          dist host ${{ needs.plan.outputs.tag-flag }} --steps=upload --steps=release --output-format=json > dist-manifest.json\n",
        "      - id: host\n"
        "        shell: bash\n"
        "        env:\n"
        "          TAG_FLAG: ${{ needs.plan.outputs.tag-flag }}\n"
        "        run: |\n"
        "          # shellcheck disable=SC2086 # empty, or one flag\n"
        "          dist host $TAG_FLAG --steps=upload --steps=release --output-format=json > dist-manifest.json\n",
        "template-injection: the tag reaches the shell as a variable",
    ),
    (
        '          RELEASE_COMMIT: "${{ github.sha }}"\n',
        '          RELEASE_COMMIT: "${{ github.sha }}"\n'
        '          TAG: "${{ needs.plan.outputs.tag }}"\n',
        "template-injection: the tag reaches `gh release create` as a variable",
    ),
    (
        '          gh release create "${{ needs.plan.outputs.tag }}" --target',
        '          gh release create "$TAG" --target',
        "template-injection: the tag reaches `gh release create` as a variable",
    ),
    (
        "    if: ${{ always() && needs.host.result == 'success' }}\n"
        '    runs-on: "ubuntu-22.04"\n',
        "    if: ${{ always() && needs.host.result == 'success' }}\n"
        '    runs-on: "ubuntu-22.04"\n'
        "    permissions:\n"
        '      "contents": "read"\n',
        "excessive-permissions: the announcement reads the checkout",
    ),
]

HEADER = (
    "# Generated by scripts/release-workflow.py: cargo-dist's release workflow (dist generate,\n"
    "# from dist-workspace.toml) with zizmor's findings fixed. Edit those, not this file.\n"
    "#\n"
)


def generate(dist: str) -> str:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        for name in files:
            if not name:
                continue
            source = ROOT / name.decode()
            if not source.is_file():
                continue  # deleted in the working tree
            target = scratch / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        config = scratch / "dist-workspace.toml"
        text = config.read_text()
        if text.count(ALLOW_DIRTY) != 1:
            sys.exit(f"dist-workspace.toml: expected one line `{ALLOW_DIRTY.strip()}`")
        config.write_text(text.replace(ALLOW_DIRTY, ""))
        subprocess.run([dist, "generate", "--mode", "ci"], cwd=scratch, check=True)
        generated = (scratch / WORKFLOW).read_text()
    for old, new, why in FIXES:
        count = generated.count(old)
        if count != 1:
            sys.exit(f"dist's release.yml has {count} of the text this fix replaces ({why}):\n{old}")
        generated = generated.replace(old, new)
    return HEADER + generated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--dist", default=shutil.which("dist"), help="the dist program")
    args = parser.parse_args()
    if not args.dist:
        sys.exit("dist is not on PATH: cargo install cargo-dist --locked --version 0.34.0")
    wanted = generate(args.dist)
    path = ROOT / WORKFLOW
    if args.check:
        have = path.read_text() if path.exists() else ""
        if have != wanted:
            sys.stdout.writelines(
                difflib.unified_diff(
                    have.splitlines(keepends=True),
                    wanted.splitlines(keepends=True),
                    WORKFLOW,
                    "what scripts/release-workflow.py writes",
                )
            )
            sys.exit(1)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(wanted)


if __name__ == "__main__":
    main()
