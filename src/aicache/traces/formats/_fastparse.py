"""Byte-level parsers of the clean text traces — one id per line (``lcs-txt``) and comma
columns of plain numbers (``lcs-csv``) — and of oracle-general records, written into
typed arrays.

Compiled by Cython at install (:data:`aicache.native.CYTHON`): a pass over the bytes with
no Python object per line, which is what lets ``aicache sim cache`` read a text trace as
fast as libCacheSim's C reader. Uncompiled (no compiler, or ``AICACHE_PURE_PYTHON=1``) the
same code runs as Python, correct but slow per byte, so the readers call these only where
:data:`compiled` is true and otherwise take their general path (``str.split`` and ``int``
per chunk), which gives the same requests.

Both parsers accept only the unambiguous case and return ``-1`` for anything else — a
blank line, a sign, spaces, a quote, a lone CR, an id of 2**64 or more, a number the
general path reads differently — so the caller hands that chunk to the general path, which
knows every rule of the format (hashed ids, skipped blank lines, bad records with their
line numbers). What they accept they read exactly as the general path does: ``int`` of a
decimal string, and ``float`` of ``DIGITS[.DIGITS]`` with at most 2**53 - 1 as its digits
read as one integer and at most 22 fraction digits, where ``m / 10**k`` of two exactly
represented doubles is the correctly rounded value ``float`` returns.
"""

from __future__ import annotations

try:
    import cython
except ImportError:  # uncompiled without Cython installed: the same code, run as Python
    from aicache.policies import _cython_shim as cython  # type: ignore[no-redef]  # (the same names)

#: whether this module runs compiled (the readers use it only then)
compiled: bool = cython.compiled

_NL = cython.declare(cython.int, 10)
_CR = cython.declare(cython.int, 13)
_COMMA = cython.declare(cython.int, 44)
_DOT = cython.declare(cython.int, 46)
_MINUS = cython.declare(cython.int, 45)
_QUOTE = cython.declare(cython.int, 34)
_ZERO = cython.declare(cython.int, 48)
_NINE = cython.declare(cython.int, 57)
#: (2**64 - 1) // 10 and its last digit: the bound of a uint64 being read digit by digit
_U64_TENTH = cython.declare(cython.ulonglong, 1844674407370955161)
_U64_LAST = cython.declare(cython.int, 5)
_U64_ALL = cython.declare(cython.ulonglong, 18446744073709551615)
_I64_MAX = cython.declare(cython.longlong, 9223372036854775807)
_I64_TENTH = cython.declare(cython.longlong, 922337203685477580)
_I64_LAST = cython.declare(cython.int, 7)
#: the largest integer a double holds exactly, and the most fraction digits read exactly
_F53 = cython.declare(cython.longlong, 9007199254740991)
_MAX_FRAC = cython.declare(cython.int, 22)


def parse_ids(buf: cython.uchar[::1], end: cython.Py_ssize_t,
              ids: cython.ulonglong[::1]) -> cython.Py_ssize_t:
    """The ids of ``buf[:end]``, lines of one decimal id each ending in LF or CRLF (the
    last may end at ``end``), into ``ids`` (``len(ids)`` at least the number of lines).
    Returns the number of ids, or -1 where any line is something else."""
    i: cython.Py_ssize_t = 0
    n: cython.Py_ssize_t = 0
    c: cython.int
    d: cython.int
    v: cython.ulonglong
    while i < end:
        c = buf[i]
        if c < _ZERO or c > _NINE:
            return -1
        v = 0
        while True:
            d = c - _ZERO
            if v > _U64_TENTH or (v == _U64_TENTH and d > _U64_LAST):
                return -1
            v = v * 10 + d
            i += 1
            if i == end:
                break
            c = buf[i]
            if c < _ZERO or c > _NINE:
                break
        if i < end:
            if c == _CR:
                i += 1
                if i == end or buf[i] != _NL:
                    return -1
            elif c != _NL:
                return -1
            i += 1
        ids[n] = v
        n += 1
    return n


def parse_columns(buf: cython.uchar[::1], end: cython.Py_ssize_t, width: cython.int,
                  id_col: cython.int, t_col: cython.int, s_col: cython.int, n_col: cython.int,
                  limit: cython.Py_ssize_t, vt: cython.longlong,
                  ts: cython.double[::1], ids: cython.ulonglong[::1],
                  sizes: cython.longlong[::1], nxt: cython.longlong[::1]) -> cython.Py_ssize_t:
    """The records of ``buf[:end]``, lines of exactly ``width`` comma-separated fields
    ending in LF or CRLF (the last may end at ``end``), into the columns: the id (decimal
    uint64) at ``id_col``, the time at ``t_col`` (``DIGITS[.DIGITS]``; without one, ``vt``
    plus the record's index), the size at ``s_col`` (decimal int64; 1 without one), the
    next access at ``n_col`` (decimal int64 >= -1, INT64_MAX read as -1; not written
    without one). Other fields may hold anything but a quote or a CR; a line may be at
    most ``limit`` bytes with its LF. Returns the number of records, or -1 where any line is
    something else."""
    i: cython.Py_ssize_t = 0
    n: cython.Py_ssize_t = 0
    line: cython.Py_ssize_t
    f: cython.int
    c: cython.int
    d: cython.int
    neg: cython.bint
    u: cython.ulonglong
    m: cython.longlong
    k: cython.int
    scale: cython.double
    while i < end:
        line = i
        f = 0
        while True:  # one field per turn; i is at its first byte
            c = buf[i] if i < end else _NL
            if f == id_col:
                if c < _ZERO or c > _NINE:
                    return -1
                u = 0
                while _ZERO <= c <= _NINE:
                    d = c - _ZERO
                    if u > _U64_TENTH or (u == _U64_TENTH and d > _U64_LAST):
                        return -1
                    u = u * 10 + d
                    i += 1
                    c = buf[i] if i < end else _NL
                ids[n] = u
            elif f == t_col:
                if c < _ZERO or c > _NINE:
                    return -1
                m = 0
                k = 0
                while _ZERO <= c <= _NINE:
                    m = m * 10 + (c - _ZERO)
                    if m > _F53:
                        return -1
                    i += 1
                    c = buf[i] if i < end else _NL
                if c == _DOT:
                    i += 1
                    c = buf[i] if i < end else _NL
                    while _ZERO <= c <= _NINE:
                        m = m * 10 + (c - _ZERO)
                        k += 1
                        if m > _F53 or k > _MAX_FRAC:
                            return -1
                        i += 1
                        c = buf[i] if i < end else _NL
                scale = 1.0
                while k > 0:  # powers of ten up to 1e22 are exact, so is each product
                    scale *= 10.0
                    k -= 1
                ts[n] = cython.cast(cython.double, m) / scale
            elif f == s_col or f == n_col:
                neg = False
                if c == _MINUS and f == n_col:
                    neg = True
                    i += 1
                    c = buf[i] if i < end else _NL
                if c < _ZERO or c > _NINE:
                    return -1
                m = 0
                while _ZERO <= c <= _NINE:
                    d = c - _ZERO
                    if m > _I64_TENTH or (m == _I64_TENTH and d > _I64_LAST):
                        return -1
                    m = m * 10 + d
                    i += 1
                    c = buf[i] if i < end else _NL
                if neg:
                    if m > 1:
                        return -1
                    m = -m
                if f == s_col:
                    sizes[n] = m
                else:
                    nxt[n] = -1 if m == _I64_MAX else m
            else:
                while c != _COMMA and c != _NL:
                    if c == _QUOTE or c == _CR:
                        return -1
                    i += 1
                    c = buf[i] if i < end else _NL
            # the field ends here: a comma, or the line's end
            f += 1
            if c == _COMMA:
                if f == width:
                    return -1
                i += 1
                continue
            if f != width or i - line + 1 > limit:  # the line's bytes and its LF
                return -1
            if c == _CR:
                i += 1
                if i == end or buf[i] != _NL:
                    return -1
            elif c != _NL:
                return -1
            i += 1  # past the LF (or past end at the file's unterminated last line)
            break
        if t_col < 0:
            ts[n] = cython.cast(cython.double, vt + n)
        if s_col < 0:
            sizes[n] = 1
        n += 1
    return n


def parse_oracle(buf: cython.uchar[::1], count: cython.Py_ssize_t, ids: cython.ulonglong[::1],
                 sizes: cython.longlong[::1]) -> cython.Py_ssize_t:
    """The id and size of each of the ``count`` oracle-general records in ``buf`` (24
    little-endian bytes each: u32 time, u64 id, u32 size, i64 next access) whose size is
    not 0, into ``ids`` and ``sizes``; records of size 0 are skipped, as libCacheSim's
    reader does. Returns the number written, or -1 where a record's next access is below
    -1 (INT64_MAX reads as -1): a bad record, which the general path reports."""
    r: cython.Py_ssize_t
    b: cython.Py_ssize_t
    j: cython.int
    n: cython.Py_ssize_t = 0
    key: cython.ulonglong
    nxt: cython.ulonglong
    size: cython.longlong
    for r in range(count):
        b = 24 * r
        nxt = 0
        for j in range(7, -1, -1):
            nxt = (nxt << 8) | buf[b + 16 + j]
        # signed value below -1: the top bit set and not all ones
        if nxt >> 63 and nxt != _U64_ALL:
            return -1
        size = (cython.cast(cython.longlong, buf[b + 12]) | (cython.cast(cython.longlong, buf[b + 13]) << 8)
                | (cython.cast(cython.longlong, buf[b + 14]) << 16)
                | (cython.cast(cython.longlong, buf[b + 15]) << 24))
        if size == 0:
            continue
        key = 0
        for j in range(7, -1, -1):
            key = (key << 8) | buf[b + 4 + j]
        ids[n] = key
        sizes[n] = size
        n += 1
    return n


def total(values: cython.longlong[::1]) -> cython.longlong:
    """The sum of ``values``."""
    s: cython.longlong = 0
    k: cython.Py_ssize_t
    for k in range(len(values)):
        s += values[k]
    return s
