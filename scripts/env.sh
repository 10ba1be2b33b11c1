# Sourced by the scripts: make cargo reachable under sudo (whose secure_path
# drops ~/.cargo/bin) and move to the repository root.
for d in "${CARGO_HOME:-$HOME/.cargo}/bin" "/home/${SUDO_USER:-}/.cargo/bin" /root/.cargo/bin; do
  if [ -x "$d/cargo" ]; then
    PATH="$d:$PATH"
    break
  fi
done
export PATH
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
