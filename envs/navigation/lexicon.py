"""The vocabulary the map world is generated from: cities, districts, name stems, POI kinds.

Cities, districts and their administrative codes are real (approximate centres, GCJ-02-ish
longitude/latitude); every POI built from them is synthetic. The stems are deliberately a
small shared pool: when several cities draw the same stem, the same or nearly the same
names appear in several cities, which is exactly the ambiguity real POI search has
("人民公园" exists in most Chinese cities).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class City:
    name: str          # "深圳市"
    short: str         # "深圳"
    english: str       # "Shenzhen"
    province: str
    adcode: str
    citycode: str
    center: tuple[float, float]  # (lon, lat)
    districts: tuple[tuple[str, str], ...]  # (name, adcode)


CITIES: tuple[City, ...] = (
    City("北京市", "北京", "Beijing", "北京市", "110000", "010", (116.407526, 39.904030),
         (("东城区", "110101"), ("西城区", "110102"), ("朝阳区", "110105"), ("海淀区", "110108"),
          ("丰台区", "110106"), ("石景山区", "110107"), ("通州区", "110112"), ("昌平区", "110114"))),
    City("上海市", "上海", "Shanghai", "上海市", "310000", "021", (121.473701, 31.230416),
         (("黄浦区", "310101"), ("徐汇区", "310104"), ("长宁区", "310105"), ("静安区", "310106"),
          ("浦东新区", "310115"), ("闵行区", "310112"), ("宝山区", "310113"), ("杨浦区", "310110"))),
    City("广州市", "广州", "Guangzhou", "广东省", "440100", "020", (113.264385, 23.129112),
         (("越秀区", "440104"), ("天河区", "440106"), ("海珠区", "440105"), ("荔湾区", "440103"),
          ("白云区", "440111"), ("番禺区", "440113"), ("南沙区", "440115"), ("黄埔区", "440112"))),
    City("深圳市", "深圳", "Shenzhen", "广东省", "440300", "0755", (114.057868, 22.543099),
         (("福田区", "440304"), ("罗湖区", "440303"), ("南山区", "440305"), ("宝安区", "440306"),
          ("龙岗区", "440307"), ("龙华区", "440309"), ("盐田区", "440308"), ("光明区", "440311"))),
    City("杭州市", "杭州", "Hangzhou", "浙江省", "330100", "0571", (120.155070, 30.274084),
         (("上城区", "330102"), ("拱墅区", "330105"), ("西湖区", "330106"), ("滨江区", "330108"),
          ("萧山区", "330109"), ("余杭区", "330110"))),
    City("成都市", "成都", "Chengdu", "四川省", "510100", "028", (104.066541, 30.572269),
         (("锦江区", "510104"), ("青羊区", "510105"), ("金牛区", "510106"), ("武侯区", "510107"),
          ("成华区", "510108"), ("双流区", "510116"), ("郫都区", "510117"))),
    City("南京市", "南京", "Nanjing", "江苏省", "320100", "025", (118.796877, 32.060255),
         (("玄武区", "320102"), ("秦淮区", "320104"), ("建邺区", "320105"), ("鼓楼区", "320106"),
          ("栖霞区", "320113"), ("江宁区", "320115"), ("浦口区", "320111"))),
    City("西安市", "西安", "Xi'an", "陕西省", "610100", "029", (108.939840, 34.341270),
         (("新城区", "610102"), ("碑林区", "610103"), ("莲湖区", "610104"), ("雁塔区", "610113"),
          ("未央区", "610112"), ("灞桥区", "610111"), ("长安区", "610116"))),
)

# Two-character place stems shared by all cities (each city draws a subset).
STEMS: tuple[str, ...] = tuple(
    "东涌 凤凰 青龙 白云 金湖 翠竹 红岭 紫荆 梧桐 桃源 玉泉 云岭 松山 鹿鸣 银湖 星河 望江 锦江 "
    "明月 清泉 碧波 虎山 莲花 荔枝 仙湖 观澜 西丽 东湖 南湖 北湖 滨江 江湾 海湾 大鹏 青山 石门 "
    "金沙 银杏 樱花 牡丹 芙蓉 月牙 双龙 九龙 三元 五福 七星 天鹅 白鹭 彩虹 朝阳 阳光 长青 永安 "
    "太平 和平 新华 解放 龙潭 凤鸣 翠湖 文华 东山 西山 南山 北山 香山 梅林 桂园 枫林".split()
)


@dataclass(frozen=True)
class Kind:
    """A POI kind: its name suffix, Amap-style type string and code, and the modifiers that
    make plausible near-duplicates of a name of this kind (东涌广场 → 东涌文化广场)."""

    suffix: str
    type: str
    typecode: str
    modifiers: tuple[str, ...]
    opentime: str
    cost: tuple[int, int]  # ticket price range in yuan; (0, 0) = free
    weight: float = 1.0    # how common the kind is


ATTRACTION_KINDS: tuple[Kind, ...] = (
    Kind("广场", "风景名胜;公园广场;城市广场", "110105", ("文化", "凤凰", "市民", "时代", "中心", "体育", "音乐"), "全天", (0, 0), 4.0),
    Kind("公园", "风景名胜;公园广场;公园", "110101", ("湿地", "森林", "文化", "生态", "儿童", "体育", "滨水"), "06:00-22:00", (0, 0), 4.0),
    Kind("寺", "风景名胜;风景名胜;寺庙道观", "110205", ("禅", "古", "大", "万寿", "法华"), "08:00-17:00", (5, 30), 2.0),
    Kind("博物馆", "科教文化服务;博物馆;博物馆", "140100", ("民俗", "历史", "自然", "科技", "艺术"), "09:00-17:00", (0, 0), 2.0),
    Kind("古镇", "风景名胜;风景名胜;风景名胜", "110200", ("老街", "水乡", "客家", "民俗"), "全天", (0, 0)),
    Kind("植物园", "风景名胜;公园广场;植物园", "110103", ("热带", "药用", "沙漠", "花卉"), "07:30-18:00", (10, 40)),
    Kind("湖景区", "风景名胜;风景名胜;风景名胜", "110200", ("生态", "湿地", "郊野", "度假"), "全天", (0, 60)),
    Kind("美术馆", "科教文化服务;美术馆;美术馆", "140200", ("当代", "现代", "书画", "雕塑"), "10:00-18:00", (0, 50)),
    Kind("步行街", "购物服务;特色商业街;步行街", "061001", ("美食", "文化", "老", "商业"), "全天", (0, 0)),
    Kind("森林公园", "风景名胜;公园广场;公园", "110101", ("国家", "郊野", "生态", "城市"), "06:00-19:00", (0, 20)),
    Kind("塔", "风景名胜;风景名胜;风景名胜", "110200", ("宝", "文", "观光", "古"), "09:00-21:00", (20, 120)),
    Kind("纪念馆", "科教文化服务;展览馆;展览馆", "140300", ("革命", "历史", "名人", "烈士"), "09:00-17:00", (0, 0)),
)

# Names that really exist in many Chinese cities: the same exact name in several cities.
GENERIC_ATTRACTIONS: tuple[tuple[str, int], ...] = (
    ("人民公园", 1), ("中山公园", 1), ("世纪广场", 0), ("文化广场", 0), ("人民广场", 0),
    ("城隍庙", 2), ("文庙", 2), ("滨江公园", 1), ("青年公园", 1), ("科技馆", 3),
)

# Sub-POIs Amap returns next to a place (gates, parking, stops): they contain the whole
# requested name, so they are the most tempting wrong hits.
SUB_POIS: tuple[tuple[str, str, str], ...] = (
    ("-东门", "通行设施;临街院门;临街院门", "991401"),
    ("-南门", "通行设施;临街院门;临街院门", "991401"),
    ("-北门", "通行设施;临街院门;临街院门", "991401"),
    ("停车场", "交通设施服务;停车场;停车场相关", "150900"),
    ("(地铁站)", "交通设施服务;地铁站;地铁站", "150500"),
    ("(公交站)", "交通设施服务;公交车站;公交车站相关", "150700"),
    ("游客中心", "风景名胜;风景名胜相关;旅游景点", "110000"),
)

HOTEL_BRANDS: tuple[tuple[str, ...], ...] = (
    # sibling brands of one group: searching one name finds the others
    ("如家酒店", "如家精选酒店", "如家商旅酒店"),
    ("汉庭酒店", "汉庭优佳酒店"),
    ("全季酒店",),
    ("7天酒店", "7天优品酒店"),
    ("维也纳酒店", "维也纳国际酒店", "维也纳3好酒店"),
    ("亚朵酒店", "亚朵S酒店"),
    ("锦江之星", "锦江之星品尚"),
    ("桔子酒店", "桔子水晶酒店"),
)
HOTEL_TYPE = ("住宿服务;宾馆酒店;经济型连锁酒店", "100105")

MALL_PATTERNS: tuple[str, ...] = ("{stem}万象城", "{stem}天街", "{stem}大悦城", "{stem}购物公园", "{stem}印象城")
MALL_TYPE = ("购物服务;商场;购物中心", "060101")

STATION_SUFFIXES: tuple[str, ...] = ("站", "北站", "东站", "南站", "西站")
STATION_TYPE = ("交通设施服务;火车站;火车站", "150200")
AIRPORT_TYPE = ("交通设施服务;机场相关;飞机场", "150104")

ROAD_SUFFIXES: tuple[str, ...] = ("路", "大道", "街", "北路", "南路", "东路", "西路")
WEATHER_KINDS: tuple[str, ...] = ("晴", "多云", "阴", "小雨", "阵雨", "雷阵雨", "中雨")
WIND_DIRECTIONS: tuple[str, ...] = ("东", "南", "西", "北", "东南", "东北", "西南", "西北")
