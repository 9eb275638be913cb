"""Independent checks of a stop, from the recorded command stream only (not from the code's
intent): the peak commanded acceleration of every joint while its drive is enabled, and the
state at which its drive was disabled."""
import numpy as np

ENABLED = 0x0637      # statusword of an enabled drive (as the emulator and the fake publish it)
QDD_MAX = np.radians([600, 600, 600, 900, 900, 900])    # assets/cobot6.yaml, rad/s^2


def peak_command_accel(q_cmd, status, dt, first_row, valid=None, statusword_mask=0x006F):
    """(n,) largest |second difference of q_cmd| / dt^2 [rad/s^2] per joint over rows >=
    `first_row` in which the drive reported OPERATION ENABLED in all three rows of the
    difference (the command of a drive that is not enabled is not followed). `valid` (N,) bool:
    rows whose frame came back complete; differences over a row whose frame was lost (whether
    the drive received that command is unknown) or over the two rows after it (where the stop
    restarts from the measured state of a drive that did not) are left out."""
    q = np.asarray(q_cmd, float)[first_row:]
    en = (np.asarray(status).astype(np.int64)[first_row:] & statusword_mask) == (ENABLED & statusword_mask)
    if valid is not None:
        bad = ~np.asarray(valid, bool)
        bad = bad | np.r_[False, bad[:-1]] | np.r_[False, False, bad[:-2]]
        en = en & ~bad[first_row:, None]
    acc = np.abs(q[2:] - 2 * q[1:-1] + q[:-2]) / dt**2
    ok = en[2:] & en[1:-1] & en[:-2]
    return np.where(ok, acc, 0.0).max(axis=0)


def standstill_before_disable(q_cmd, status, dt, first_row, tol_rad_s=1e-9):
    """Per joint: the command velocity [rad/s] in the first row after `first_row` whose drive no
    longer reports OPERATION ENABLED (row k holds the command for the time of row k: 0 means
    the command was at rest when the drive was disabled); None if it never left."""
    q = np.asarray(q_cmd, float)
    en = (np.asarray(status).astype(np.int64) & 0x006F) == (ENABLED & 0x006F)
    out = []
    for j in range(q.shape[1]):
        left = np.flatnonzero(en[first_row:-1, j] & ~en[first_row + 1:, j])
        if not left.size:
            out.append(None)
            continue
        k = first_row + int(left[-1]) + 1
        out.append(abs(q[k, j] - q[k - 1, j]) / dt)
    return out


def peak_truth_accel(truth, dt, t_from, w=5):
    """(n,) largest |q[k+w] - 2 q[k] + q[k-w]| / (w dt)^2 of the command the emulated drives
    RECEIVED (twin.ethercat truth: q_cmd while enabled, in whole encoder counts) over periods
    from time `t_from` [s] (emulator clock) on, all 2w+1 periods enabled. The window w keeps the
    count quantization (6 urad: +-12 rad/s^2 on a 1-cycle difference) below 0.5 rad/s^2; a
    one-cycle jump of the command's velocity still shows (divided by w)."""
    t = np.asarray(truth["t"], float)
    sel = t >= t_from
    q, en = np.asarray(truth["q_cmd"], float)[sel], np.asarray(truth["enabled"], bool)[sel]
    acc = np.abs(q[2 * w:] - 2 * q[w:-w] + q[:-2 * w]) / (w * dt)**2
    run = np.cumsum(np.r_[np.zeros((1, en.shape[1])), ~en], axis=0)       # disabled periods so far
    ok = (run[2 * w + 1:] - run[:-2 * w - 1]) == 0
    return np.where(ok, acc, 0.0).max(axis=0)
