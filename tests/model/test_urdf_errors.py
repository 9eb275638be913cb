"""Bad URDFs raise errors that name the problem; fixed joints are merged correctly."""
import numpy as np
import pytest

from identify import RobotModel
from identify.model.urdf import URDFError, load_chain

INERTIAL = """<inertial><origin xyz="0.01 0.02 0.03"/><mass value="1.5"/>
  <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.015"/></inertial>"""


def _write(tmp_path, body, name="bad.urdf"):
    path = tmp_path / name
    path.write_text(f'<?xml version="1.0"?><robot name="t">{body}</robot>')
    return path


def _link(name, inertial=True):
    return f'<link name="{name}">{INERTIAL if inertial else ""}</link>'


def _joint(name, parent, child, jtype="revolute", xyz="0 0 0.1", axis="0 0 1"):
    lim = '<limit lower="-3" upper="3" effort="10" velocity="2"/>' if jtype != "fixed" else ""
    return (f'<joint name="{name}" type="{jtype}"><parent link="{parent}"/><child link="{child}"/>'
            f'<origin xyz="{xyz}"/><axis xyz="{axis}"/>{lim}</joint>')


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.urdf"):
        RobotModel.from_urdf(tmp_path / "nope.urdf")


def test_tree_is_refused(tmp_path):
    path = _write(tmp_path, _link("base") + _link("a") + _link("b") +
                  _joint("j1", "base", "a") + _joint("j2", "base", "b"))
    with pytest.raises(URDFError, match=r"not a serial chain.*'j1' and 'j2'"):
        load_chain(path)


def test_prismatic_is_refused_unless_locked(tmp_path):
    path = _write(tmp_path, _link("base") + _link("a") + _link("b") +
                  _joint("j1", "base", "a") + _joint("slide", "a", "b", "prismatic"))
    with pytest.raises(URDFError, match=r"joint 'slide' is 'prismatic'"):
        load_chain(path)
    chain = load_chain(path, joints=["j1"])  # locked at zero -> merged
    assert chain.joint_names == ["j1"]


def test_floating_is_refused(tmp_path):
    path = _write(tmp_path, _link("base") + _link("a") + _joint("free", "base", "a", "floating"))
    with pytest.raises(URDFError, match=r"'free' is 'floating'"):
        load_chain(path)


def test_massless_frame_links_merge_as_mass_zero(tmp_path):
    """ROS-style frames (tool0, flange: no <inertial>) on fixed joints count as mass 0: the chain
    equals the one without them (it was refused before: 'link tool ... has no <inertial>')."""
    with_frame = _write(tmp_path, _link("base", inertial=False) + _link("a") + _link("tool", False)
                        + _joint("j1", "base", "a") + _joint("fix", "a", "tool", "fixed"))
    c = load_chain(with_frame)
    (tmp_path / "plain").mkdir()
    plain = load_chain(_write(tmp_path / "plain", _link("base", inertial=False) + _link("a")
                              + _joint("j1", "base", "a")))
    np.testing.assert_array_equal(c.params, plain.params)
    assert c.bodies[1] == ["a", "tool"]


def test_unknown_joint_subset_and_bad_xml(tmp_path):
    path = _write(tmp_path, _link("base") + _link("a") + _joint("j1", "base", "a"))
    with pytest.raises(URDFError, match=r"joint\(s\) \['jx'\] not in the URDF"):
        load_chain(path, joints=["jx"])
    bad = tmp_path / "broken.urdf"
    bad.write_text("<robot><link name='a'>")
    with pytest.raises(URDFError, match="broken.urdf: not valid XML"):
        load_chain(bad)


def test_fixed_joint_merge_equals_single_body(tmp_path):
    """Two links joined by a fixed joint behave as one body with the combined inertia."""
    two = _write(tmp_path, _link("base") + _link("a") + _link("b") +
                 _joint("j1", "base", "a") + _joint("fix", "a", "b", "fixed", xyz="0.2 0 0") +
                 _link("c") + _joint("j2", "b", "c", axis="0 1 0"), "two.urdf")
    import pinocchio as pin
    m = RobotModel.from_urdf(two)
    pm = pin.buildModelFromUrdf(str(two))
    pd = pm.createData()
    rng = np.random.default_rng(0)
    for _ in range(5):
        q, qd, qdd = rng.normal(size=(3, 2))
        np.testing.assert_allclose(m.inverse_dynamics(q, qd, qdd), pin.rnea(pm, pd, q, qd, qdd),
                                   rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("edit, match", [
    (('<mass value="1.5"/>', '<mass value="-1.5"/>'), r"link 'a': <mass value='-1.5'> must be a finite mass >= 0"),
    (('<mass value="1.5"/>', '<mass value="nan"/>'), r"link 'a': <mass value='nan'> must be a finite mass"),
    (('ixx="0.01"', 'ixx="inf"'), r"link 'a': <inertia> ixx not a finite number"),
    (('ixx="0.01"', 'ixx="-0.2"'), r"link 'a': <inertia> has a negative principal moment"),
    (('<origin xyz="0.01 0.02 0.03"/>', '<origin xyz="0.01 nan 0.03"/>'),
     r"link 'a'/inertial/origin@xyz: non-finite number in '0.01 nan 0.03'"),
])
def test_non_physical_inertial_refused(tmp_path, edit, match):
    """A negative or NaN mass, a NaN inertia or origin, or a negative principal moment: refused
    at load, naming the link (before: a NaN / negative model identified without a word)."""
    bad = INERTIAL.replace(*edit)
    path = _write(tmp_path, _link("base") + f'<link name="a">{bad}</link>' + _joint("j1", "base", "a"))
    with pytest.raises(URDFError, match=match):
        load_chain(path)


def test_broken_base_inertial_refused_and_rounded_tensor_accepted(tmp_path):
    """The fixed base carries no parameters, but a broken file is refused there too; a vendor
    tensor rounded a hair below positive semi-definite is accepted."""
    bad = INERTIAL.replace('<mass value="1.5"/>', '<mass value="-4"/>')
    path = _write(tmp_path, f'<link name="base">{bad}</link>' + _link("a") + _joint("j1", "base", "a"))
    with pytest.raises(URDFError, match=r"link 'base': <mass value='-4'>"):
        load_chain(path)
    # principal moments 0.02 +- 0.02000001: one of them -1e-8 (rounding), accepted
    rounded = INERTIAL.replace('ixx="0.01" ixy="0"', 'ixx="0.02" ixy="0.02000001"').replace(
        'iyy="0.02"', 'iyy="0.02"')
    path = _write(tmp_path, _link("base") + f'<link name="a">{rounded}</link>' + _joint("j1", "base", "a"),
                  name="ok.urdf")
    assert load_chain(path).axes.shape == (1, 3)


@pytest.mark.parametrize("where, match", [
    ('<origin xyz="0 0 nan"/>', r"joint 'j1'/origin@xyz: non-finite number"),
    ('<limit lower="nan" upper="3" effort="10" velocity="2"/>', r"joint 'j1' <limit lower='nan'> is not a number"),
    ('<limit lower="-3" upper="x" effort="10" velocity="2"/>', r"joint 'j1' <limit upper='x'> is not a number"),
    ('<dynamics damping="-0.1"/>', r"joint 'j1' <dynamics damping='-0.1'> must be a finite number >= 0"),
    ('<dynamics friction="nan"/>', r"joint 'j1' <dynamics friction='nan'> must be a finite number >= 0"),
])
def test_bad_joint_numbers_refused(tmp_path, where, match):
    j = _joint("j1", "base", "a")
    tag = where.split()[0]
    if tag == "<origin":
        j = j.replace('<origin xyz="0 0 0.1"/>', where)
    elif tag == "<limit":
        j = j.replace('<limit lower="-3" upper="3" effort="10" velocity="2"/>', where)
    else:
        j = j.replace("</joint>", where + "</joint>")
    path = _write(tmp_path, _link("base") + _link("a") + j)
    with pytest.raises(URDFError, match=match):
        load_chain(path)
