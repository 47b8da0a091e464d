"""What makes a simulated host a host: its name, its /etc/hosts, its sshd with its own host key,
and an ssh client configuration that reaches the other hosts with the cluster's user key.

Everything lives in the cluster's temporary directory and is bind-mounted inside the host's own
mount namespace, so nothing on the machine changes: not /etc, not /run, not ~/.ssh.
"""

import os
import pwd
import shlex

from tools.simcluster.processes import ClusterError, run

SSHD = "/usr/sbin/sshd"
SSH_CLIENT_CONFIG = "/etc/ssh/ssh_config"


def keygen(path, comment):
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
        f"ssh-keygen {os.path.basename(path)}")
    with open(path + ".pub") as f:
        return f.read().strip()


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


class ClusterIdentity:
    """The files every host shares: user key, authorized keys, known hosts, hosts file, ssh client
    configuration. Host i's own files are under host-<name>/."""

    def __init__(self, workdir, spec):
        self.workdir = workdir
        self.spec = spec
        self.user_key = os.path.join(workdir, "userkey")
        self.authorized_keys = os.path.join(workdir, "authorized_keys")
        self.known_hosts = os.path.join(workdir, "known_hosts")
        self.hosts_file = os.path.join(workdir, "hosts")
        self.ssh_config = os.path.join(workdir, "ssh_config")
        self.empty_ssh_dir = os.path.join(workdir, "dotssh")

    def host_dir(self, i):
        return os.path.join(self.workdir, f"host-{self.spec.hosts[i].name}")

    def sshd_log(self, i):
        return os.path.join(self.host_dir(i), "sshd.log")

    def create(self):
        spec = self.spec
        user_pub = keygen(self.user_key, "hvdsim-user")
        write(self.authorized_keys, user_pub + "\n", 0o600)
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{spec.address(i)}\t{h.name}" for i, h in enumerate(spec.hosts)]
        write(self.hosts_file, "\n".join(lines) + "\n")
        known = []
        for i, h in enumerate(spec.hosts):
            d = self.host_dir(i)
            os.makedirs(d, mode=0o700)
            host_pub = keygen(os.path.join(d, "ssh_host_ed25519_key"), f"hvdsim-{h.name}")
            known.append(f"{h.name},{spec.address(i)} {' '.join(host_pub.split()[:2])}")
            write(os.path.join(d, "hostname"), h.name + "\n")
            write(os.path.join(d, "sshd_config"), self._sshd_config(i), 0o600)
        write(self.known_hosts, "\n".join(known) + "\n")
        write(self.ssh_config, self._ssh_config())
        os.makedirs(self.empty_ssh_dir, mode=0o700)

    def _sshd_config(self, i):
        # A complete configuration (-f): nothing comes from /etc/ssh/sshd_config. No PAM and no
        # pty for horovodrun's commands, so no login records are written anywhere.
        d = self.host_dir(i)
        return "\n".join([
            "Port 22",
            "AddressFamily inet",
            "ListenAddress 0.0.0.0",          # the host's own network namespace: only its eth0
            f"HostKey {d}/ssh_host_ed25519_key",
            "PidFile none",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "PermitUserEnvironment no",
            # horovodrun opens one connection per remote rank at once, plus its checks.
            "MaxStartups 128:30:256",
            "MaxSessions 128",
            "LogLevel INFO",
        ]) + "\n"

    def _ssh_config(self):
        # Replaces /etc/ssh/ssh_config inside the hosts; the real ~/.ssh is hidden there too, so
        # this is all the client reads and the only place it writes.
        return "\n".join([
            "Host *",
            f"  IdentityFile {self.user_key}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {self.known_hosts}",
            "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes",
            "  BatchMode yes",
            "  ConnectTimeout 10",
            "  ServerAliveInterval 5",
            "  ServerAliveCountMax 6",
            "  LogLevel ERROR",
            "  User root",
        ]) + "\n"

    def init_script(self, i):
        """What runs as PID 1 of host i's PID namespace before it becomes the host's sshd: a
        private /run (sshd's privilege-separation directory), /sys of its own network namespace,
        its own /etc/hosts, /etc/hostname and ssh client configuration, its host name."""
        d = self.host_dir(i)
        q = shlex.quote
        home_ssh = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".ssh")
        lines = [
            "set -e",
            "mount -t sysfs sysfs /sys",
            "mount -t tmpfs -o mode=0755,size=16m hvdsim-run /run",
            "mkdir -m 0755 /run/sshd && mkdir -m 1777 /run/lock && ln -s /dev/shm /run/shm",
            f"mount --bind {q(self.hosts_file)} /etc/hosts",
            f"[ -e /etc/hostname ] && mount --bind {q(d + '/hostname')} /etc/hostname || true",
            f"mount --bind {q(self.ssh_config)} {SSH_CLIENT_CONFIG}",
            f"[ -d {q(home_ssh)} ] && mount --bind {q(self.empty_ssh_dir)} {q(home_ssh)} || true",
            f"hostname {q(self.spec.hosts[i].name)}",
            f"exec {SSHD} -D -f {q(d + '/sshd_config')} -E {q(self.sshd_log(i))} </dev/null",
        ]
        return "\n".join(lines)

    def init_log(self, i):
        return os.path.join(self.host_dir(i), "init.log")

    @staticmethod
    def read_log(path, limit=4000):
        try:
            with open(path) as f:
                return f.read()[-limit:].strip() or "(empty)"
        except OSError as e:
            return f"(unreadable: {e})"


def check_ssh_client_config_exists():
    if not os.path.exists(SSH_CLIENT_CONFIG):
        raise ClusterError(f"{SSH_CLIENT_CONFIG} is missing: install openssh-client")
